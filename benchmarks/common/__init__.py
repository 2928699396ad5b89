"""What the benchmark groups share: printing (report), recorded results and the docs' figures
(results, figures), deterministic inputs (scenes) and engine stand-ins (engines)."""
