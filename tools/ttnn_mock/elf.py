"""A minimal valid ELF32 RISC-V executable: what the stand-in linker writes for every kernel."""

from __future__ import annotations

import struct

EM_RISCV = 243
ET_EXEC = 2
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 1, 2, 3, 4
SHF_ALLOC, SHF_EXECINSTR, SHF_MERGE_STRINGS = 0x2, 0x4, 0x30
PT_LOAD = 1
NOP = 0x00000013  # addi x0, x0, 0


def minimal_riscv_elf(text_address: int = 0x6040, comment: str = "") -> bytes:
    """An ELF32 RISC-V executable with one loadable .text segment (4 nops), a symbol table
    naming _start, an empty .rela.text and the section-name table: the sections tt-metal's
    ELF loader reads from a kernel binary. `comment` (a compiler string) fills .comment,
    which the tests use to stand in for a firmware file."""
    text = struct.pack("<4I", *([NOP] * 4))
    shstr = b"\0.text\0.rela.text\0.symtab\0.strtab\0.shstrtab\0.comment\0"
    section_names = (".text", ".rela.text", ".symtab", ".strtab", ".shstrtab", ".comment")
    names = {n: shstr.index(n.encode() + b"\0") for n in section_names}
    strtab = b"\0_start\0"
    # Elf32_Sym: name, value, size, info, other, shndx
    symtab = struct.pack("<IIIBBH", 0, 0, 0, 0, 0, 0) + struct.pack(
        "<IIIBBH",
        1,
        text_address,
        len(text),
        0x12,
        0,
        1,  # GLOBAL FUNC in section 1
    )
    rela = b""
    ehsize, phentsize, shentsize = 52, 32, 40
    offset = ehsize + phentsize
    layout = []
    note = comment.encode() + b"\0" if comment else b""
    blobs = [text, rela, symtab, strtab, shstr, note]
    for blob in blobs:
        offset = (offset + 3) & ~3
        layout.append(offset)
        offset += len(blob)
    shoff = (offset + 3) & ~3
    # section headers: name, type, flags, addr, offset, size, link, info, addralign, entsize
    sections = [
        struct.pack("<10I", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack(
            "<10I",
            names[".text"],
            SHT_PROGBITS,
            SHF_ALLOC | SHF_EXECINSTR,
            text_address,
            layout[0],
            len(text),
            0,
            0,
            4,
            0,
        ),
        struct.pack("<10I", names[".rela.text"], SHT_RELA, 0x40, 0, layout[1], 0, 3, 1, 4, 12),
        struct.pack("<10I", names[".symtab"], SHT_SYMTAB, 0, 0, layout[2], len(symtab), 4, 1, 4, 16),
        struct.pack("<10I", names[".strtab"], SHT_STRTAB, 0, 0, layout[3], len(strtab), 0, 0, 1, 0),
        struct.pack("<10I", names[".shstrtab"], SHT_STRTAB, 0, 0, layout[4], len(shstr), 0, 0, 1, 0),
        struct.pack(
            "<10I", names[".comment"], SHT_PROGBITS, SHF_MERGE_STRINGS, 0, layout[5], len(note), 0, 0, 1, 1
        ),
    ]
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        "<HHIIIIIHHHHHH",
        ET_EXEC,
        EM_RISCV,
        1,
        text_address,
        ehsize,
        shoff,
        0,
        ehsize,
        phentsize,
        1,
        shentsize,
        len(sections),
        5,
    )
    program = struct.pack("<8I", PT_LOAD, layout[0], text_address, text_address, len(text), len(text), 5, 4)
    out = bytearray(header + program)
    for start, blob in zip(layout, blobs, strict=True):
        out.extend(bytes(start - len(out)))
        out.extend(blob)
    out.extend(bytes(shoff - len(out)))
    for section in sections:
        out.extend(section)
    return bytes(out)
