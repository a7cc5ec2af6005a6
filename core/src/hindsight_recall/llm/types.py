"""What core hands a chat model and what it gets back: provider-neutral, so prompts are written once.

The types live in :mod:`hindsight_recall.types`, beside the other value types, so the protocols can
name them; this module is where providers import them from.
"""

from ..types import ChatReply as ChatReply
from ..types import ChatRequest as ChatRequest
from ..types import Message as Message
from ..types import PromptBlock as PromptBlock
from ..types import Role as Role
from ..types import Usage as Usage
from ..types import as_int as as_int
from ..types import prompt_text as prompt_text
