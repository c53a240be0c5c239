"""The replica's WebSocket output: every applied block pushed to the subscribers of ``/stream``.

====================  ===========================================================================
``fanout``            ``Fanout``: connections, channels, one encode per market per block, bounded
                      per-connection queues (conflate, then disconnect)
``_bookjson``         the order_book update rendered in C (optional; encoded in Python else)
``account_channels``  Lighter's account channels: addresses, who may subscribe, per-block updates
====================  ===========================================================================
"""

from .fanout import NATIVE_PATHS, Client, Fanout, FanoutStats, split_channel

__all__ = ["NATIVE_PATHS", "Client", "Fanout", "FanoutStats", "split_channel"]
