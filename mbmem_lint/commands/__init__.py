"""The commands of ``mbmem-lint``, one module each: thin click layers over the pipeline's modules.

``mbmem_lint.cli`` lists them and imports only the one that runs.
"""
