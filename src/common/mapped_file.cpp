// A read-only file in memory: mmap (MAP_PRIVATE), so a model's bytes are paged in on demand.
#include "repro/common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  check_regular_file(path, "model file", uint64_t{1} << 40);  // a FIFO or device is refused, never opened
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw UsageError("cannot open model file '" + path + "': " + std::strerror(errno) +
                     "; check the path and its permissions");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError("cannot read model file '" + path + "': not a regular file; give a .gguf or llama2.c .bin file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw UsageError("cannot map model file '" + path + "': " + std::strerror(e) + "; check free memory");
    }
    map_ = m;
    data_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace repro
