-- traceaug.base: the cheap core the analyses share, built without touching every
-- slice's args: GPU ops keyed by (device, stream), runtime calls with their
-- correlation id, ProfilerStep windows. Overlap lanes are folded back: `tid` is
-- the original thread id, never a lane.

-- Kineto categories of both schemas (current and 2021) and what they are.
CREATE PERFETTO TABLE _traceaug_kind AS
SELECT column1 AS category, column2 AS kind, column3 AS gpu
FROM (VALUES
  ('kernel', 'kernel', 1), ('Kernel', 'kernel', 1),
  ('gpu_memcpy', 'memcpy', 1), ('Memcpy', 'memcpy', 1),
  ('gpu_memset', 'memset', 1), ('Memset', 'memset', 1),
  ('cuda_runtime', 'runtime', 0), ('Runtime', 'runtime', 0), ('cuda_driver', 'runtime', 0),
  ('cpu_op', 'cpu_op', 0), ('Operator', 'cpu_op', 0),
  ('user_annotation', 'annotation', 0), ('gpu_user_annotation', 'gpu_annotation', 0),
  ('python_function', 'python', 0),
  ('cuda_sync', 'sync', 1),
  -- MTIA (HTA's MTIA traces): on-device CCP events are its kernels, mtia_runtime its launches.
  ('mtia_ccp_events', 'kernel', 1), ('mtia_runtime', 'runtime', 0));

-- Every thread track with its pid and tid; a lane thread's tid is the original one
-- (every slice on a lane carries it in args.traceaug_tid).
CREATE PERFETTO TABLE _traceaug_track AS
WITH lanes AS (
  SELECT s.track_id,
         MIN(extract_arg(s.arg_set_id, 'args.traceaug_tid')) AS tid,
         MIN(extract_arg(s.arg_set_id, 'args.traceaug_lane')) AS lane
  FROM slice s
  WHERE s.track_id IN (
    SELECT tt.id FROM thread_track tt JOIN thread t USING (utid)
    WHERE t.name GLOB '*~lane[0-9]*' OR t.name GLOB '* [[]overlap lane [0-9]*]')
  GROUP BY s.track_id)
SELECT tt.id AS track_id, p.pid, COALESCE(l.tid, t.tid) AS tid, COALESCE(l.lane, 0) AS lane
FROM thread_track tt
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
LEFT JOIN lanes l ON l.track_id = tt.id;

-- GPU work (kernels, copies, sets) keyed by (device, stream). Copies and DMA that run as
-- kernels (MTIA's CCP `dma_request`) are copies by name, as HTA types them (Memcpy|Memset|dma).
-- Each use of s.name fetches and measures the name (kernel names run to hundreds of bytes):
-- only a name starting with 'M' (77) or 'd' (100) is matched against the patterns.
CREATE PERFETTO VIEW traceaug_gpu_op AS
SELECT
  s.id, s.ts, s.dur, s.name, s.category,
  CASE
    WHEN k.kind != 'kernel' THEN k.kind
    WHEN unicode(s.name) NOT IN (77, 100) THEN k.kind
    WHEN s.name GLOB 'Memset*' THEN 'memset'
    WHEN s.name GLOB 'Memcpy*' OR s.name GLOB 'dma*' THEN 'memcpy'
    ELSE k.kind
  END AS kind,
  COALESCE(extract_arg(s.arg_set_id, 'args.correlation'),
           extract_arg(s.arg_set_id, 'args.correlation id')) AS correlation,
  s.arg_set_id, tr.pid,
  COALESCE(CAST(extract_arg(s.arg_set_id, 'args.device') AS INT), tr.pid) AS device,
  COALESCE(CAST(extract_arg(s.arg_set_id, 'args.stream') AS INT), tr.tid) AS stream
FROM slice s
JOIN _traceaug_kind k USING (category)
JOIN _traceaug_track tr USING (track_id)
WHERE s.category IN ('kernel', 'Kernel', 'gpu_memcpy', 'Memcpy', 'gpu_memset', 'Memset',
                     'mtia_ccp_events');

-- Runtime and driver calls with the correlation id that links them to their GPU work.
CREATE PERFETTO VIEW traceaug_runtime AS
SELECT
  s.id, s.ts, s.dur, s.name,
  COALESCE(extract_arg(s.arg_set_id, 'args.correlation'),
           extract_arg(s.arg_set_id, 'args.correlation id')) AS correlation
FROM slice s
WHERE s.category IN ('cuda_runtime', 'Runtime', 'cuda_driver', 'mtia_runtime');

-- ProfilerStep#N windows (a user annotation now, an Operator in the 2021 schema).
CREATE PERFETTO TABLE traceaug_step AS
SELECT id, ts, dur, name
FROM slice
WHERE category IN ('user_annotation', 'cpu_op', 'Operator') AND name GLOB 'ProfilerStep#*';
