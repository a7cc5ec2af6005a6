"""Tag filters for recall's statements: :func:`~hindsight_recall.store.filters.tag_filter`, which the
store's listings share."""

from ..store.filters import tag_filter as tag_filter
