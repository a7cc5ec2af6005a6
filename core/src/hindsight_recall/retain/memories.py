"""Reading and validating memories to retain: :mod:`hindsight_recall.jsonl`, which the store and the
archive reader share."""

from ..jsonl import KNOWN_FIELDS as KNOWN_FIELDS
from ..jsonl import MAX_TEXT_CHARS as MAX_TEXT_CHARS
from ..jsonl import memory_line as memory_line
from ..jsonl import parse_datetime as parse_datetime
from ..jsonl import parse_lines as parse_lines
from ..jsonl import parse_memory as parse_memory
from ..jsonl import read_jsonl as read_jsonl
