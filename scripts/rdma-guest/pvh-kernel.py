#!/usr/bin/env python3
# pvh-kernel.py -- VMLINUZ OUT: write the uncompressed kernel ELF of a Debian
# x86-64 bzImage (xz payload) to OUT if it has a PVH entry point
# (XEN_ELFNOTE_PHYS32_ENTRY). QEMU boots such an ELF directly (-kernel), which
# skips the real-mode setup and the xz decompression: about 4 s per boot
# under TCG. Exit status 1 (and no OUT) when the kernel does not qualify;
# scripts/rdma-guest.sh then boots the bzImage.
import lzma, struct, sys

src, dst = sys.argv[1], sys.argv[2]
d = open(src, 'rb').read()
off = d.find(b'\xfd7zXZ\x00')
if off < 0:
    sys.exit("no xz payload")
elf = lzma.LZMADecompressor().decompress(d[off:])
if elf[:4] != b'\x7fELF' or elf[4] != 2:
    sys.exit("payload is not a 64-bit ELF")
phoff, = struct.unpack_from('<Q', elf, 0x20)
phentsize, phnum = struct.unpack_from('<HH', elf, 0x36)
pvh = False
for i in range(phnum):
    p_type, _, p_off, _, _, p_filesz = struct.unpack_from('<IIQQQQ', elf, phoff + i * phentsize)
    if p_type != 4:  # PT_NOTE
        continue
    pos, end = p_off, p_off + p_filesz
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from('<III', elf, pos)
        name = elf[pos + 12:pos + 12 + namesz].rstrip(b'\0')
        if name == b'Xen' and ntype == 18:  # XEN_ELFNOTE_PHYS32_ENTRY
            pvh = True
        pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
if not pvh:
    sys.exit("no PVH entry note")
open(dst, 'wb').write(elf)
