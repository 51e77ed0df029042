"""The one place aclprof's version is written (pyproject.toml reads it; the daemon, the agent
and the CLI import it)."""

__version__ = "0.1.0"
