"""Jobs: every rank of a training job as the unit of work.

``ranks`` finds a directory's ranks (one discovery, one precedence rule) and pairs two jobs'
ranks; ``result`` is a rank's outcome as plain data (tables and its absolute time base, never
a live engine); ``executor`` runs per-rank tasks on a local process pool sized to the machine
or on a Dask ``distributed`` cluster; ``run`` drives the tasks with retries, failures named by
rank, and progress; ``api`` is ``traceaug.load_job``.
"""
