// Thin main: everything lives in the core library (src/cli/app.cpp).
#include "repro/cli/commands.hpp"

int main(int argc, char** argv) { return repro::cli::main_entry(argc, argv); }
