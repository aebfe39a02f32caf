"""Every command, declared once (``declare.Command``): the click commands (``cli``), the Python
API functions (``api``) and the prefetch come from these declarations."""

from .analyses import BREAKDOWN, GAPS, KERNELS, LAUNCHES
from .collectives import COLLECTIVES, STRAGGLERS
from .convert import CONVERT, OPEN
from .counters import COUNTERS
from .critical_path import CRITICAL_PATH
from .diff import DIFF
from .info import INFO
from .merge import MERGE
from .patterns import PATTERNS
from .query import QUERY
from .report import REPORT
from .summary import SUMMARY
from .whatif import WHATIF

ALL = (QUERY, INFO, COUNTERS, DIFF, OPEN, CONVERT, SUMMARY, PATTERNS, KERNELS, GAPS, BREAKDOWN,
       LAUNCHES, REPORT, COLLECTIVES, STRAGGLERS, MERGE, CRITICAL_PATH, WHATIF)
