"""The devices: what this process can see (``probe``), which device a test gets
(``placement``), and CUDA errors that poison a process (``faults``)."""
