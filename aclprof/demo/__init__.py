"""Demo code on the bundled mock: ``python -m aclprof.demo`` (the library alone), the
simulated inference service the ``aclprof demo`` command starts (:mod:`.service`), and
the model descriptions they run (:mod:`.models`)."""
