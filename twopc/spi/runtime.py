"""The protocol's parts that twopc's Spark glue and composite sink are made of.

- The Spark writers: :class:`TwoPhaseCommitBatchWriter`, :class:`TwoPhaseCommitStreamWriter`,
  :class:`TwoPCCommitMessage`; the options twopc reads itself: :class:`RuntimeOptions`,
  :data:`RUNTIME_OPTION_NAMES`, :data:`RUNTIME_KEYS`.
- A batch's commit: :class:`BatchResult`, :class:`CommitMetrics`, :class:`CommitRetry`.
- The composite sink: :class:`CompositeSink`, :class:`CompositeHandle`,
  :class:`CompositeDataSourceBase`, :func:`participant_sink_id`.
- Handles as bytes and text: :func:`encode_handle`, :func:`decode_handle`,
  :func:`dumps_handle`, :func:`loads_handle`, :func:`registered_handle_kinds`.
- A package's names imported on first use (PEP 562): :func:`lazy_exports` gives the package its
  ``__getattr__`` and ``__dir__``, so that a Spark Python worker loads only the modules it runs.
- A data source's entry point in a Spark Python worker (a reader's ``read``): :func:`note_worker_use`
  keeps the collections PySpark's daemon runs after each use of a reused worker cheap.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .._composite import CompositeHandle, CompositeSink, participant_sink_id
    from .._coordinator import BatchResult, CommitMetrics
    from .._handle import decode_handle, dumps_handle, encode_handle, loads_handle, registered_handle_kinds
    from .._retry import CommitRetry
    from .._runtime_options import RUNTIME_KEYS, RUNTIME_OPTION_NAMES, RuntimeOptions
    from .._worker_heap import note_worker_use
    from ..spark._commit_message import TwoPCCommitMessage
    from ..spark._composite_source import CompositeDataSourceBase
    from ..spark._writer import TwoPhaseCommitBatchWriter, TwoPhaseCommitStreamWriter
__all__ = ["RUNTIME_KEYS", "RUNTIME_OPTION_NAMES", "BatchResult", "CommitMetrics", "CommitRetry",
           "CompositeDataSourceBase", "CompositeHandle", "CompositeSink", "RuntimeOptions", "TwoPCCommitMessage",
           "TwoPhaseCommitBatchWriter", "TwoPhaseCommitStreamWriter", "decode_handle", "dumps_handle", "encode_handle",
           "lazy_exports", "loads_handle", "note_worker_use", "participant_sink_id", "registered_handle_kinds"]

#: Every name loads on first use (see :mod:`twopc._lazy`): a worker reads the few it runs.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("CompositeHandle", "CompositeSink", "participant_sink_id"), ".._composite"),
    **dict.fromkeys(("BatchResult", "CommitMetrics"), ".._coordinator"),
    **dict.fromkeys(("decode_handle", "dumps_handle", "encode_handle", "loads_handle", "registered_handle_kinds"),
                    ".._handle"),
    **dict.fromkeys(("RUNTIME_KEYS", "RUNTIME_OPTION_NAMES", "RuntimeOptions"), ".._runtime_options"),
    **dict.fromkeys(("TwoPhaseCommitBatchWriter", "TwoPhaseCommitStreamWriter"), "..spark._writer"),
    "CommitRetry": ".._retry", "CompositeDataSourceBase": "..spark._composite_source",
    "TwoPCCommitMessage": "..spark._commit_message", "note_worker_use": ".._worker_heap",
})
