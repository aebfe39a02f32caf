-- traceaug.counters: what the queue-length and memory-bandwidth counters are made of.
INCLUDE PERFETTO MODULE traceaug.base;

-- Runtime / driver calls that enqueue work on a stream (CUDA, ROCm and MTIA: HTA's MTIA launch
-- `runFunction - job_prep_and_submit_for_execution`, and the queued copies). Integer ids only
-- (a text or real one links nothing, as in traceaug.gpu).
CREATE PERFETTO TABLE traceaug_launch AS
SELECT id, ts, dur, name, correlation
FROM traceaug_runtime
WHERE typeof(correlation) = 'integer' AND correlation > 0
  AND name IN (
    'cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx',
    'cudaLaunchCooperativeKernel', 'cudaMemcpyAsync', 'cudaMemsetAsync', 'cudaGraphLaunch',
    'cuGraphLaunch', 'hipLaunchKernel', 'hipExtLaunchKernel', 'hipModuleLaunchKernel',
    'hipExtModuleLaunchKernel', 'hipLaunchCooperativeKernel', 'hipMemcpyAsync',
    'hipMemsetAsync', 'hipMemcpyWithStream', 'hipGraphLaunch',
    'runFunction - job_prep_and_submit_for_execution', 'enqueueCommand memcpyHtoDAsync',
    'enqueueCommand memcpyDtoHAsync', 'enqueueCommand memcpyDtoDAsync');

-- Memory copies and sets with their copy kind, bytes and bandwidth (GB/s = bytes/ns).
CREATE PERFETTO TABLE traceaug_copy AS
SELECT
  id, pid, device, stream, ts, dur, name,
  IIF(typeof(correlation) = 'integer', correlation, NULL) AS correlation,
  CASE
    WHEN kind = 'memset' THEN 'Memset'
    WHEN name GLOB 'Memcpy HtoD*' THEN 'HtoD'
    WHEN name GLOB 'Memcpy DtoH*' THEN 'DtoH'
    WHEN name GLOB 'Memcpy DtoD*' THEN 'DtoD'
    WHEN name GLOB 'Memcpy PtoP*' THEN 'PtoP'
    WHEN name GLOB 'Memcpy HtoH*' THEN 'HtoH'
    ELSE 'Other'
  END AS copy_kind,
  SUBSTR(name, 1, IIF(kind = 'memset', 6, 11)) AS hta_name,
  extract_arg(arg_set_id, 'args.bytes') AS bytes,
  extract_arg(arg_set_id, 'args.memory bandwidth (GB/s)') AS bw_arg
FROM traceaug_gpu_op
WHERE kind IN ('memcpy', 'memset')
ORDER BY id;
