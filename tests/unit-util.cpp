#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/common/threadpool.hpp"
#include "repro/common/util.hpp"
#include "test_util.hpp"

using namespace repro;

TEST_CASE("sha256 of known strings") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("thread pool covers the range exactly once") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int n : {0, 1, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int b, int e) {
        for (int i = b; i < e; ++i) hits[i]++;
      });
      for (int i = 0; i < n; ++i) CHECK(hits[i] == 1);
    }
  }
}

TEST_CASE("atomic write replaces the file and reports unwritable paths") {
  auto dir = test::scratch_dir("util-atomic");
  auto p = (dir / "a.txt").string();
  write_file_atomic(p, "one");
  write_file_atomic(p, "two");
  CHECK(read_file(p) == "two");
  CHECK_THROWS_WITH_AS(write_file_atomic((dir / "missing" / "x").string(), "x"),
                       doctest::Contains("check that its directory exists"), UsageError);
  CHECK_THROWS_AS(read_file((dir / "nope").string()), UsageError);
}
