"""The Snakemake workflow's library side (``workflow/Snakefile``), one module per concept.

- :mod:`.layout`: experiment names, slugs, every path under ``results/``, solver namespaces;
- :mod:`.config`: the grid (:class:`~.config.Experiment`), config validation, unsupported
  method/workload pairs (the paper's NI) and plans that cannot be measured (the paper's *);
- :mod:`.fingerprint`: the library-code hash of each stage (a rule's ``params:``);
- :mod:`.cache`: content-addressed subproblem, batch and solve files, the cost model, batching;
- :mod:`.datasets`: data sources, seeded synthetic records, loading;
- :mod:`.steps`: the file-level function each rule script calls (the same planning, measuring and
  reconstructing functions as the CLI and the API, for every kind of method);
- :mod:`.evaluate`: metrics of one experiment;
- :mod:`.report`: aggregate tables and figures of the grid;
- :mod:`.paper_report`, :mod:`.paper_plots`: the paper's tables and figures beside ours.

Rules only wire files together; ``scripts/*.py`` call one function of :mod:`.steps`,
:mod:`.evaluate` or :mod:`.report` each. Modules import the numeric libraries where they are used,
so parsing the Snakefile stays fast.
"""
