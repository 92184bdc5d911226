"""Observing the attention inside a real run: ``python -m profiler observe -- script.py`` and
:func:`profiler.observe`. See profiler.observer.run."""
