-- traceaug.kineto: Kineto events of both schemas, classified, with their GPU
-- identity (device, stream) and correlation id. Overlap lanes are folded back:
-- `tid` is the original thread id, never a lane.

CREATE PERFETTO TABLE traceaug_event AS
SELECT
  s.id,
  s.ts,
  s.dur,
  s.name,
  s.category,
  s.depth,
  s.arg_set_id,
  CASE
    WHEN s.category IN ('kernel', 'Kernel') THEN 'kernel'
    WHEN s.category IN ('gpu_memcpy', 'Memcpy') THEN 'memcpy'
    WHEN s.category IN ('gpu_memset', 'Memset') THEN 'memset'
    WHEN s.category IN ('cuda_runtime', 'Runtime', 'cuda_driver') THEN 'runtime'
    WHEN s.category IN ('cpu_op', 'Operator') THEN 'cpu_op'
    WHEN s.category = 'user_annotation' THEN 'annotation'
    WHEN s.category = 'gpu_user_annotation' THEN 'gpu_annotation'
    WHEN s.category = 'python_function' THEN 'python'
    ELSE 'other'
  END AS kind,
  p.pid AS pid,
  COALESCE(extract_arg(s.arg_set_id, 'args.traceaug_tid'), t.tid) AS tid,
  COALESCE(extract_arg(s.arg_set_id, 'args.traceaug_lane'), 0) AS lane,
  -- GPU identity only where Kineto means it (ROCm runtime calls carry "stream": "0x0").
  IIF(s.category IN ('kernel', 'Kernel', 'gpu_memcpy', 'Memcpy', 'gpu_memset', 'Memset'),
      CAST(extract_arg(s.arg_set_id, 'args.device') AS INT), NULL) AS device,
  IIF(s.category IN ('kernel', 'Kernel', 'gpu_memcpy', 'Memcpy', 'gpu_memset', 'Memset'),
      CAST(extract_arg(s.arg_set_id, 'args.stream') AS INT), NULL) AS stream,
  COALESCE(extract_arg(s.arg_set_id, 'args.correlation'),
           extract_arg(s.arg_set_id, 'args.correlation id')) AS correlation
FROM slice s
JOIN thread_track tt ON s.track_id = tt.id
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid);

-- GPU work (kernels, copies, sets) keyed by (device, stream).
CREATE PERFETTO VIEW traceaug_gpu_op AS
SELECT
  id, ts, dur, name, category, kind, correlation, arg_set_id, pid,
  COALESCE(device, pid) AS device,
  COALESCE(stream, tid) AS stream
FROM traceaug_event
WHERE kind IN ('kernel', 'memcpy', 'memset');

-- ProfilerStep#N windows (a user annotation now, an Operator in the 2021 schema).
CREATE PERFETTO VIEW traceaug_step AS
SELECT id, ts, dur, name
FROM traceaug_event
WHERE kind IN ('annotation', 'cpu_op') AND name GLOB 'ProfilerStep#*';
