# Generates a C++ file with one function returning a text file's contents, so the binary carries it.
# Usage: cmake -DIN=<file> -DOUT=<file.cpp> -DFUNC=<function name> -DHEADER=<include> -P embed_text.cmake
file(READ ${IN} text)
set(body "// Generated from ${IN} by cmake/embed_text.cmake. Do not edit.\n#include \"${HEADER}\"\n\nnamespace repro {\n")
string(APPEND body "const std::string& ${FUNC}() {\n  static const std::string t = R\"RA_TEXT(${text})RA_TEXT\";\n  return t;\n}\n")
string(APPEND body "}  // namespace repro\n")
file(WRITE ${OUT}.new "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.new ${OUT})
