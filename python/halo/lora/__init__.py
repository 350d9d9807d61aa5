"""LoRA adapters, as vllm.lora."""
