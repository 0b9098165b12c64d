"""Use cases: the algorithms the handlers run (poll, consume a batch, process a stream batch) and
the one two of them share (send: claim and send, used by the poll and the stream batch), over the
adapters (store, arming, queues) and the pure decisions."""
