"""A GGUF's copy with every quantized tensor dequantized to F32 by gguf-py (llama.cpp's own Python reader):
IN OUT. llama.cpp on the copy computes in float32 over exactly the quantized file's weight values."""
import sys
import numpy as np
sys.path.insert(0, "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")
import gguf
reader = gguf.GGUFReader(sys.argv[1])
writer = gguf.GGUFWriter(sys.argv[2], reader.fields["general.architecture"].contents())
for name, field in reader.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
    writer.add_key_value(name, field.contents(), field.types[0], sub)
for t in reader.tensors:
    if t.tensor_type in (gguf.GGMLQuantizationType.F32,):
        writer.add_tensor(t.name, np.array(t.data))
    else:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, values.reshape([int(d) for d in reversed(t.shape)]))
writer.write_header_to_file(); writer.write_kv_data_to_file(); writer.write_tensors_to_file(); writer.close()
