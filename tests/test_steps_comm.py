"""``steps.is_comm``: which GPU op names are NCCL / RCCL communication kernels (HTA's
"communication" kernel type), each distinct name matched once; names whose answer is known
by what the kernels are, repeated as a trace repeats them, and values that are no names."""

from __future__ import annotations

import numpy as np

from traceaug.analysis.steps import is_comm
from traceaug.analysis.tables import matches

# (name, communication?) known from what the kernels are
NAMES = [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", True),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", True),
    ("NCCLKERNEL_upper_case_still_nccl", True),
    ("rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)", True),
    ("hipExtModuleLaunch_ncclAllReduce", True),
    ("void foo<ncclKernel_Broadcast>(int)", True),  # ncclKernel anywhere
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >"
     "(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::"
     "MulFunctor<float> >, at::detail::Array<char*, 2>)", False),
    ("void gather_nccl_buffers<float>(float*)", False),  # "nccl" inside, not a NCCL kernel's
    ("hipMemcpyAsync", False),  # hip, no nccl after it
    ("ampere_sgemm_128x64_nn", False),
    ("Memcpy DtoD (Device -> Device)", False),
    ("", False),
]


def test_known_names_repeated_and_non_names() -> None:
    rng = np.random.default_rng(7)
    pick = rng.integers(0, len(NAMES), 500)  # every name many times, in no order
    names = [NAMES[i][0] for i in pick] + [None, float("nan"), 3, b"ncclKernel_x"]
    want = [NAMES[i][1] for i in pick] + [False] * 4
    for given in (names, np.array(names, dtype=object)):
        got = is_comm(given)
        assert got.dtype == bool and got.tolist() == want
    assert is_comm([]).tolist() == []


def test_each_distinct_value_is_tested_once() -> None:
    seen: list[str] = []
    values = ["a", "bb", "a", None, "bb", "a", 1, "ccc"] * 50

    def test(v: str) -> bool:
        seen.append(v)
        return len(v) > 1

    got = matches(values, test)
    assert sorted(seen) == ["a", "bb", "ccc"]  # None and 1 are no strings: never tested
    assert got.tolist() == [False, True, False, False, True, False, False, True] * 50
