"""What the API, the CLI and the app resolve or check for a method before and around building it: the one
door into decoding/methods/ besides the registry and the spec. Outside this folder nothing imports a method's
own modules; they import the resources here, which several methods or surfaces share (a draft model, heads,
an adapter, reference texts, a retrieval datastore, the suffix cache's histories).
"""
from __future__ import annotations

from decoding.methods.draft_model.shipped_draft import (AUTO_DRAFT, CARD, NO_DRAFT, default_draft,  # noqa: F401
                                                        load_draft, with_layout)
from decoding.methods.draft_model.speculative import check_compatible  # noqa: F401 (draft vs target)
from decoding.methods.lookup.reference_text import (check_references, read_reference,  # noqa: F401
                                                    tokenize_references)
from decoding.methods.retrieve.datastore import build as build_datastore, source_files  # noqa: F401
from decoding.methods.retrieve.retrieval import open_datastore  # noqa: F401
from decoding.methods.retrieve.suffix_cache import Histories  # noqa: F401 (a server's per-session histories)
from decoding.methods.self_draft.heads import (KINDS as HEADS_KINDS, HeadsError, check_heads_files,  # noqa: F401
                                               check_shipped_heads_fit,
                                               default_heads, heads_folder, load_heads)
from decoding.methods.self_draft.heads_tune import heads_label  # noqa: F401 (a heads tree's words)
from decoding.methods.self_draft.self_spec_adapter import CONFIG as ADAPTER_CONFIG, shipped_adapter  # noqa: F401
