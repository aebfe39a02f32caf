-- traceaug.kineto: every Kineto event of both schemas, classified, with its GPU
-- identity (device, stream) and correlation id; plus everything in traceaug.base.
-- Overlap lanes are folded back: `tid` is the original thread id, never a lane.
INCLUDE PERFETTO MODULE traceaug.base;

CREATE PERFETTO VIEW traceaug_event AS
SELECT
  s.id,
  s.ts,
  s.dur,
  s.name,
  s.category,
  s.depth,
  s.arg_set_id,
  COALESCE(k.kind, 'other') AS kind,
  tr.pid,
  tr.tid,
  tr.lane,
  -- GPU identity only where Kineto means it (ROCm runtime calls carry "stream": "0x0").
  IIF(k.gpu, CAST(extract_arg(s.arg_set_id, 'args.device') AS INT), NULL) AS device,
  IIF(k.gpu, CAST(extract_arg(s.arg_set_id, 'args.stream') AS INT), NULL) AS stream,
  COALESCE(extract_arg(s.arg_set_id, 'args.correlation'),
           extract_arg(s.arg_set_id, 'args.correlation id')) AS correlation
FROM slice s
JOIN _traceaug_track tr USING (track_id)
LEFT JOIN _traceaug_kind k USING (category);
