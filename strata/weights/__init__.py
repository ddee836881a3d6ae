"""Weight sources (HF safetensors folder, GGUF file, random weights of a named shape) behind one
interface, and the one function that builds a model from a source."""
