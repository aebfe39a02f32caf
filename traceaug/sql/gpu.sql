-- traceaug.gpu: GPU ops with the runtime call that launched them: what the kernel, gap,
-- launch and breakdown analyses read.
INCLUDE PERFETTO MODULE traceaug.base;

-- The runtime / driver calls whose correlation id is an integer: grouped here, the id is
-- read from the args for the filter and the value only, not again for the grouping key
-- (12% of the launches' cost on a 6,700-call rank). An id that is no integer ("abc",
-- 1e308) links nothing, as in every analysis (critical path too); a table column holds
-- one type.
CREATE PERFETTO TABLE _traceaug_runtime_correlation AS
SELECT correlation, id
FROM traceaug_runtime
WHERE typeof(correlation) = 'integer';

-- The first runtime / driver call of each correlation id (the launch of its GPU ops).
CREATE PERFETTO TABLE _traceaug_first_launch AS
SELECT correlation, MIN(id) AS id
FROM _traceaug_runtime_correlation
GROUP BY correlation;

-- Every GPU op (kernel, copy, set; MTIA CCP event) with its launch, NULL when no call in
-- the trace shares its correlation id (such ops are kept: analyses place them by time).
CREATE PERFETTO VIEW traceaug_gpu_op_launch AS
SELECT g.id, g.ts, g.dur, g.name, g.kind, g.device, g.stream, g.correlation,
       r.ts AS launch_ts, r.dur AS launch_dur, r.name AS launch_name
FROM traceaug_gpu_op g
LEFT JOIN _traceaug_first_launch l USING (correlation)
LEFT JOIN slice r ON r.id = l.id;

