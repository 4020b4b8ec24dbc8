"""``mbmem-lint diagnose``: read training logs, find OOMs, memory reports and known failures, and
classify each OOM (fragmentation, capacity, one-stage imbalance, known error, unknown).

    logread.py    stream a log (plain or gzip) line by line, with the rank of each line
    formats.py    the exact message formats (PyTorch allocator, Megatron report_memory, ...), cited
    scan.py       lines → events (OOMs, memory reports, known errors) and a bounded summary
    classify.py   events → diagnoses with suggestions
    compare.py    measured per-stage peaks against the estimate (``--recipe``)
    measurements.py  the committed ``.mbmem-lint/measurements.json`` (``--record``)

Pure modules: nothing here imports torch or reads a recipe; the CLI wires them together.
"""
