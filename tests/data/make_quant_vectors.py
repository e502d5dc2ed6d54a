#!/usr/bin/python3
"""Makes tests/data/quant_vectors.gguf: for each ggml block format, the first rows of one tensor
of a llama-quantize'd model ("<type>.blocks", in that format) and ggml's dequantization of the same
rows ("<type>.ggml", F32, from `llama-quantize --allow-requantize Q.gguf DEQ.gguf F32`); and the
unquantized rows themselves ("source.f32"). The test core/formats/quantized_gguf_test.cc requires
pdserve's dequantization to equal ggml's, and its quantization llama-quantize's, bit for bit.

Usage: make_quant_vectors.py OUT.gguf TENSOR ROWS32 ROWSK source=F32.gguf TYPE=Q.gguf:DEQ.gguf ...
(ROWS32 rows for the 32-element formats, ROWSK for the K-quants; see scripts/make_quant_vectors.sh).
Standard library only: parses and writes GGUF v3 itself."""
import struct
import sys

BLOCK = {0: (1, 4), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         12: (256, 144), 13: (256, 176), 14: (256, 210)}
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_gguf(path):
    data = open(path, 'rb').read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from('<' + fmt, data, pos)
        pos += struct.calcsize('<' + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take('Q')
        s = data[pos:pos + n]
        pos += n
        return s

    def skip_value(t):
        nonlocal pos
        if t == 8:
            string()
        elif t == 9:
            et, n = take('I'), take('Q')
            for _ in range(n):
                skip_value(et)
        else:
            pos += FIXED[t]

    assert data[:4] == b'GGUF' and take('4s') and take('I') == 3
    n_tensors, n_kv = take('Q'), take('Q')
    alignment = 32
    for _ in range(n_kv):
        key = string()
        t = take('I')
        if key == b'general.alignment':
            alignment = take('I')
        else:
            skip_value(t)
    tensors = {}
    for _ in range(n_tensors):
        name = string().decode()
        dims = [take('Q') for _ in range(take('I'))]
        ggml_type, offset = take('I'), take('Q')
        tensors[name] = (dims, ggml_type, offset)
    base = (pos + alignment - 1) // alignment * alignment
    return data, base, tensors


def rows_of(path, name, rows):
    data, base, tensors = read_gguf(path)
    dims, ggml_type, offset = tensors[name]
    per_block, block_bytes = BLOCK[ggml_type]
    row_bytes = dims[0] // per_block * block_bytes
    return ggml_type, dims[0], data[base + offset:base + offset + rows * row_bytes]


def write_gguf(path, tensors):
    def string(s):
        return struct.pack('<Q', len(s)) + s.encode()
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), 0)
    offset, blobs = 0, []
    for name, ggml_type, cols, rows, blob in tensors:
        out += string(name) + struct.pack('<IQQIQ', 2, cols, rows, ggml_type, offset)
        blobs.append(blob + b'\0' * (-len(blob) % 32))
        offset += len(blobs[-1])
    out += b'\0' * (-len(out) % 32)
    open(path, 'wb').write(out + b''.join(blobs))


def main():
    out, name, rows32, rows_k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    tensors = []
    for spec in sys.argv[5:]:
        label, files = spec.split('=')
        if ':' not in files:  # the unquantized source: as many rows as any format has
            ggml_type, cols, floats = rows_of(files, name, max(rows32, rows_k))
            assert ggml_type == 0, f'{files}: {name} is not F32'
            tensors.append((f'{label}.f32', 0, cols, max(rows32, rows_k), floats))
            continue
        quantized, dequantized = files.split(':')
        ggml_type, cols, _ = rows_of(quantized, name, 1)
        rows = rows_k if BLOCK[ggml_type][0] == 256 else rows32
        ggml_type, cols, blocks = rows_of(quantized, name, rows)
        f32_type, _, floats = rows_of(dequantized, name, rows)
        assert f32_type == 0, f'{dequantized}: {name} is not F32'
        tensors.append((f'{label}.blocks', ggml_type, cols, rows, blocks))
        tensors.append((f'{label}.ggml', 0, cols, rows, floats))
    write_gguf(out, tensors)


if __name__ == '__main__':
    main()
