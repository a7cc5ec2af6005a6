"""The synthetic bank of ``bench scale`` and ``bench banks``: :mod:`hindsight_recall.testing.synthetic`,
which the test kit's slot worlds share."""

from ..testing.synthetic import COMMON_WORDS as COMMON_WORDS
from ..testing.synthetic import DIMENSIONS as DIMENSIONS
from ..testing.synthetic import FIRST_NAMES as FIRST_NAMES
from ..testing.synthetic import LAST_NAMES as LAST_NAMES
from ..testing.synthetic import START as START
from ..testing.synthetic import BenchQuery as BenchQuery
from ..testing.synthetic import SyntheticBank as SyntheticBank
from ..testing.synthetic import generate as generate
from ..testing.synthetic import queries as queries
from ..testing.synthetic import split as split
