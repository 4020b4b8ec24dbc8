"""``mbmem-lint verify``: ground truth on demand. Builds recipes for real (executing them) in an
interpreter that has Megatron Bridge and compares the result with the static resolution.

:mod:`~mbmem_lint.verify.run` drives it from mbmem-lint's side; :mod:`~mbmem_lint.verify.realbuild`
and :mod:`~mbmem_lint.verify.doubles` run inside that interpreter (standard library only);
:mod:`~mbmem_lint.verify.compare` classifies each field. ``bench/differential_check.py`` uses the same
doubles and comparison over the whole corpus.
"""
