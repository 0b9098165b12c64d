"""Use cases: the algorithms the handlers run (poll, consume a batch, process a stream batch),
over the adapters (store, arming, queues, sending) and the pure decisions."""
