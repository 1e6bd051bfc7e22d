"""Everything that serves or trains (docs/ARCHITECTURE.md §2, floor 10): the litellm gateway
(`gateway`, `providers`, `secrets`), role context windows (`context_windows`), Ray actor pools and the
Ray backend (`pools`), the Ray Serve vLLM app and local model folders (`serving`), the LoRA job
(`training`), logs (`logs`), the fault-injecting proxy (`fault_proxy`). Import the modules: each loads
its heavy backend (litellm, Ray, vLLM, torch) only when used."""
