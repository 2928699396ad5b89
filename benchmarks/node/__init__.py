"""The node and its streams: host work per frame besides the model (host), the real node under a
30 Hz camera with a slow model (stream, slow_node), and cameras dealt across chips (stream_chips)."""
