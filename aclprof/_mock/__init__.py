"""Holds the bundled mock libascendcl.so, built by `pip install .` from mock_acl/."""
