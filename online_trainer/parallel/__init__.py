"""Where runs execute: in this process, in a warm pool of worker processes, or on Ray."""
