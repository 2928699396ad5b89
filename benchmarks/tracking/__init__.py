"""Tracking: identity quality against ground truth and the trackers' cost per frame (tracking), SAM
3's own tracker on the host and priced as a chip trace, its memory over a long stream, and both
modes scored on a clip of your own (score_clip)."""
