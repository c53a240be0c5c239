"""The replica's WebSocket: the ``/stream`` endpoint, and every applied block pushed to it.

====================  ===========================================================================
``stream``            ``Stream``: the ``/stream`` handler (frames in: ping, subscribe, sendtx)
``fanout``            ``Fanout``: connections, channels, one encode per market per block, bounded
                      per-connection queues (conflate, then disconnect)
``_bookjson``         the order_book update rendered in C (optional; encoded in Python else)
``account_channels``  Lighter's account channels: addresses, who may subscribe, per-block updates
====================  ===========================================================================
"""

from .fanout import NATIVE_PATHS, Client, Fanout, FanoutStats, split_channel
from .stream import Stream

__all__ = ["NATIVE_PATHS", "Client", "Fanout", "FanoutStats", "Stream", "split_channel"]
