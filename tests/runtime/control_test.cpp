// control_test.cpp: pieces of the control plane on their own: rank-range formatting, flags,
// the segment's layout and permissions, the free-space check, op hashing, and waiting when
// processes outnumber cores.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "control.hpp"
#include "flags_text.hpp"
#include "process_runner.hpp"
#include "segment.hpp"
#include "xspawn/error.hpp"
#include "xspawn/flags.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {
namespace {

using detail::formatRankRanges;

TEST(ControlTest, RankRanges) {
  EXPECT_EQ(formatRankRanges({0, 1, 2, 4, 5, 6, 7}), "0-2,4-7");
  EXPECT_EQ(formatRankRanges({3}), "3");
  EXPECT_EQ(formatRankRanges({5, 1, 3}), "1,3,5");
  EXPECT_EQ(detail::formatRanks({3}), "rank 3");
  EXPECT_EQ(detail::formatRanks({0, 1}), "ranks 0-1");
}

TEST(ControlTest, FlagsSurviveTheEnvironment) {
  Flags f;
  f.set("lr", 0.001).set("name", std::string("a:b\nc")).set("n", 8);
  Flags g = detail::deserializeFlags(detail::serializeFlags(f));
  EXPECT_EQ(g.values(), f.values());
  EXPECT_EQ(g.get<int>("n", 0), 8);
  EXPECT_EQ(g.get("missing", "x"), "x");
  EXPECT_THROW(g.get<int>("name", 0), UsageError);
}

TEST(ControlTest, OpHashSeparatesKindAndTag) {
  using detail::OpKind;
  EXPECT_NE(detail::hashOp(OpKind::kRendezvous, "x"), detail::hashOp(OpKind::kAllReduce, "x"));
  EXPECT_NE(detail::hashOp(OpKind::kRendezvous, "x"), detail::hashOp(OpKind::kRendezvous, "y"));
}

TEST(SegmentTest, CreatedPrivateToTheUserAndRemovedByItsOwner) {
  detail::SegmentConfig c;
  c.jobId = uniqueJobId("seg");
  c.geometry.worldSize = 3;
  c.geometry.payloadChunk = 1024;
  c.geometry.coll.heapBytes = 5000;
  {
    auto seg = detail::Segment::create(c);
    struct stat st {};
    ASSERT_EQ(stat(("/dev/shm/" + seg->name()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(seg->size(), c.geometry.totalBytes());
    EXPECT_EQ(seg->header().worldSize, 3u);
    EXPECT_EQ(seg->offsetOf(&seg->slot(1)) % detail::kCacheLine, 0u);
    EXPECT_EQ(seg->offsetOf(seg->arena()) % 4096, 0u);
    EXPECT_GE(seg->size() - seg->offsetOf(seg->arena()), 5000u);
    auto other = detail::Segment::open(seg->name());
    EXPECT_EQ(other->header().payloadChunk, 1024u);
    EXPECT_THROW(detail::Segment::create(c), SegmentError);  // the name is taken
  }
  EXPECT_FALSE(segmentExists(c.jobId));
  EXPECT_THROW(detail::Segment::open(detail::Segment::nameFor(c.jobId)), SegmentError);
}

TEST(SegmentTest, FreeSpaceCheckSaysWhatIsNeededAndHowToFixIt) {
  try {
    detail::requireFreeSpace("/dev/shm", std::uint64_t(1) << 60);
    FAIL();
  } catch (const ShmSpaceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the job needs 1024.0 PiB in /dev/shm but only"), std::string::npos) << m;
    EXPECT_NE(m.find("--shm-size"), std::string::npos);
  }
  EXPECT_NO_THROW(detail::requireFreeSpace("/dev/shm", 4096));
}

TEST(WaitTest, EightProcessesOnTwoCoresBarrierWithoutSpinStorms) {
  // 8 ranks on 2 cores: with hybrid waiting 2000 barriers take well under a second; pure
  // spinning would take tens of seconds (see docs/benchmarks.md).
  SpawnOptions o;
  o.quiet = true;
  o.jobId = uniqueJobId("wait");
  auto t0 = std::chrono::steady_clock::now();
  JobResult r = spawn(
      [](int, const Flags&) {
        for (int i = 0; i < 2000; ++i) barrier("b");
      },
      8, o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_LT(s, 10.0);
}

}  // namespace
}  // namespace xs::test
