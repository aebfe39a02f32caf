"""Every rank of a job as the unit of work: ``run`` drives per-rank tasks (``parts``) on an
``executor`` (a local pool or Dask), with retries and progress; ``loaded`` is ``load_job``."""
