"""The Python API over the binding: profiling sessions (:mod:`.session`), msproftx markers
(:mod:`.markers`), step info (:mod:`.step`) and operator subscription
(:mod:`.subscription`, decoding into :mod:`.records`).

Imports the binding layer only; users reach these names through ``aclprof`` itself.
"""
