"""The ``sluice`` command line: the parser (``main``), one module per family of commands,
and the process kinds it runs (``processes``, ``api_processes``). It may import
everything: it is the top of the layout."""
