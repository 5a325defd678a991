// traceback_test.cpp: the Python traceback found in a rank's stderr (runtime/src/traceback.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "traceback.hpp"

namespace xs::detail {
namespace {

void feed(TracebackCatcher& c, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) c.line(l);
}

TEST(Traceback, TheLastTracebackWithItsExceptionLine) {
  TracebackCatcher c;
  feed(c, {"starting", "Traceback (most recent call last):", "  File \"a.py\", line 3, in <module>", "    f()",
           "RuntimeError: first", "more output", "Traceback (most recent call last):",
           "  File \"a.py\", line 9, in <module>", "    g()", "KeyError: 'x'"});
  ASSERT_EQ(c.traceback().size(), 4u);
  EXPECT_EQ(c.exception(), "KeyError: 'x'");
  EXPECT_EQ(c.traceback()[2], "    g()");
}

TEST(Traceback, AChainStaysOneTraceback) {
  TracebackCatcher c;
  feed(c, {"Traceback (most recent call last):", "  File \"a.py\", line 3, in f", "KeyError: 'images'", "",
           "The above exception was the direct cause of the following exception:", "",
           "Traceback (most recent call last):", "  File \"a.py\", line 5, in f", "ValueError: no images"});
  EXPECT_EQ(c.traceback().front(), "Traceback (most recent call last):");
  EXPECT_EQ(c.exception(), "ValueError: no images");
  EXPECT_NE(std::find(c.traceback().begin(), c.traceback().end(), "KeyError: 'images'"), c.traceback().end());
}

TEST(Traceback, NoTracebackWithoutOne) {
  TracebackCatcher c;
  feed(c, {"Traceback is a word", "error: something", "  indented"});
  EXPECT_TRUE(c.traceback().empty());
  EXPECT_EQ(c.exception(), "");
}

TEST(Traceback, ADeepRecursionKeepsItsEnds) {
  TracebackCatcher c;
  c.line("Traceback (most recent call last):");
  for (int i = 0; i < 1000; ++i) c.line("  File \"a.py\", line " + std::to_string(i) + ", in r");
  c.line("RecursionError: maximum recursion depth exceeded");
  EXPECT_LE(c.traceback().size(), TracebackCatcher::kMaxLines + 1);
  EXPECT_EQ(c.traceback()[1], "  File \"a.py\", line 0, in r");
  EXPECT_EQ(c.exception(), "RecursionError: maximum recursion depth exceeded");
  EXPECT_EQ(c.traceback()[c.traceback().size() - 2], "  File \"a.py\", line 999, in r");
}

}  // namespace
}  // namespace xs::detail
