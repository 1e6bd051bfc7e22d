"""Serving the weak model: the Ray Serve LLM app with LoRA adapters loaded by id (`app`), the Serve
classes that load them from a local folder (`_serve_llm`, imported only where Serve runs), and the local
model folders vLLM and peft both load (`models`). Import the modules: vLLM loads only where it serves."""
