"""Tag predicates shared by every arm, applied inside SQL before LIMIT."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocols import SqlFilter
from ..types import TagsMatch

_UNTAGGED = "(tags IS NULL OR tags = '{}')"


def tag_filter(tags: Sequence[str] | None, match: TagsMatch | str = TagsMatch.ANY) -> SqlFilter:
    """Build the tag predicate for a request.

    :param tags: the request tags (``None`` or empty means no tag constraint, except for ``exact``).
    :param match: one of ``any``, ``all``, ``any_strict``, ``all_strict``, ``exact``.
    """
    mode = TagsMatch(match)
    wanted = list(dict.fromkeys(tags or ()))
    if not wanted:
        return SqlFilter(_UNTAGGED) if mode is TagsMatch.EXACT else SqlFilter()
    params = {"filter_tags": wanted}
    overlap, contains = "tags && CAST(:filter_tags AS varchar[])", "tags @> CAST(:filter_tags AS varchar[])"
    sql = {
        TagsMatch.ANY: f"({_UNTAGGED} OR {overlap})",
        TagsMatch.ALL: f"({_UNTAGGED} OR {contains})",
        TagsMatch.ANY_STRICT: f"(NOT {_UNTAGGED} AND {overlap})",
        TagsMatch.ALL_STRICT: f"(NOT {_UNTAGGED} AND {contains})",
        TagsMatch.EXACT: f"({contains} AND tags <@ CAST(:filter_tags AS varchar[]))",
    }[mode]
    return SqlFilter(sql, params)
