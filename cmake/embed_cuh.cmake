# cmake -DIN=file.cuh -DOUT=header.h -DNAME=identifier -P embed_cuh.cmake
# Writes OUT: the text of IN after its marker line ("// ---- the text below is what the kernels'
# sources embed ...") as `inline constexpr char fusec::codegen::embedded::NAME[]`, a raw string
# literal, so the CUDA templates live in .cuh files (readable, highlighted as CUDA) and the
# kernels' sources stay exactly that text. OUT is rewritten only when its content changes.
file(READ "${IN}" content)
string(FIND "${content}" "// ---- the text below is what the kernels' sources embed" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${IN}: no marker line (// ---- the text below is what the kernels' sources embed ...)")
endif()
string(SUBSTRING "${content}" ${at} -1 content)
string(FIND "${content}" "\n" eol)
math(EXPR eol "${eol} + 1")
string(SUBSTRING "${content}" ${eol} -1 content)
string(FIND "${content}" ")FUSEC_CUH\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN}: the text holds the raw string's delimiter )FUSEC_CUH\"")
endif()
set(header "// Generated from ${IN} by cmake/embed_cuh.cmake: do not edit.\n#pragma once\n\nnamespace fusec::codegen::embedded {\n\ninline constexpr char ${NAME}[] = R\"FUSEC_CUH(${content})FUSEC_CUH\";\n\n}  // namespace fusec::codegen::embedded\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL header)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${header}")
