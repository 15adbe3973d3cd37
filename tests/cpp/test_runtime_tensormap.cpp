// simpler runtime: view geometry (overlap cases) and the TensorMap.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/task.h"
#include "runtime/tensor_util.h"
#include "runtime/tensormap.h"

using namespace simpler;

namespace {

// A view of a 1 MiB allocation at 0x100000: shapes/strides in elements.
ChipTensor view(std::initializer_list<uint32_t> shape, std::initializer_list<int64_t> strides, uint64_t offset,
                int32_t dtype = SIMPLER_DT_FLOAT32) {
  ChipTensor t{};
  t.buffer.addr = 0x100000;
  t.buffer.size = 1 << 20;
  t.start_offset = offset;
  t.ndims = uint32_t(shape.size());
  t.dtype = DataType(dtype);
  int k = 0;
  for (uint32_t s : shape) t.shapes[k++] = s;
  k = 0;
  for (int64_t s : strides) t.strides[k++] = s;
  return t;
}

Overlap ov(const ChipTensor& a, const ChipTensor& b) {
  std::string why;
  EXPECT_TRUE(check_view(a, &why)) << why;
  EXPECT_TRUE(check_view(b, &why)) << why;
  Overlap x = overlap(a, byte_range(a), b, byte_range(b));
  Overlap y = overlap(b, byte_range(b), a, byte_range(a));
  EXPECT_EQ(x == Overlap::None, y == Overlap::None) << "overlap must be symmetric";
  return x;
}

}  // namespace

TEST(RuntimeOverlap, ContiguousRanges) {
  EXPECT_EQ(ov(view({16}, {1}, 0), view({16}, {1}, 16)), Overlap::None);   // adjacent
  EXPECT_EQ(ov(view({16}, {1}, 0), view({16}, {1}, 15)), Overlap::Range);  // one element shared
  EXPECT_EQ(ov(view({16}, {1}, 4), view({16}, {1}, 4)), Overlap::Exact);
  EXPECT_EQ(ov(view({0}, {1}, 4), view({16}, {1}, 0)), Overlap::None);     // empty view
}

TEST(RuntimeOverlap, RowBlocksOfAMatrix) {
  // 8 x 16 f32 matrix, row pitch 16.
  ChipTensor rows_0_3 = view({4, 16}, {16, 1}, 0);
  ChipTensor row_5 = view({1, 16}, {16, 1}, 5 * 16);
  ChipTensor rows_3_6 = view({4, 16}, {16, 1}, 3 * 16);
  EXPECT_EQ(ov(rows_0_3, row_5), Overlap::None);
  EXPECT_NE(ov(rows_0_3, rows_3_6), Overlap::None);
}

TEST(RuntimeOverlap, ColumnBlocksAreBoxes) {
  // Left and right halves of an 8 x 16 matrix: their bounding ranges
  // interleave, the per-dimension boxes do not.
  ChipTensor left = view({8, 8}, {16, 1}, 0);
  ChipTensor right = view({8, 8}, {16, 1}, 8);
  EXPECT_EQ(ov(left, right), Overlap::None);
  ChipTensor middle = view({8, 8}, {16, 1}, 4);
  EXPECT_EQ(ov(left, middle), Overlap::Box);
  // A 2 x 2 tile against a row block that misses it, and one that hits it.
  ChipTensor tile = view({2, 2}, {16, 1}, 2 * 16 + 6);
  EXPECT_EQ(ov(tile, view({2, 16}, {16, 1}, 0)), Overlap::None);
  EXPECT_EQ(ov(tile, view({1, 16}, {16, 1}, 3 * 16)), Overlap::Box);
  // Columns 0..5 of every row against the tile at columns 6..7.
  EXPECT_EQ(ov(tile, view({8, 6}, {16, 1}, 0)), Overlap::None);
}

TEST(RuntimeOverlap, InterleavedElements) {
  ChipTensor even = view({32}, {2}, 0);
  ChipTensor odd = view({32}, {2}, 1);
  EXPECT_EQ(ov(even, odd), Overlap::None);
  EXPECT_EQ(ov(even, view({1}, {1}, 10)), Overlap::Box);   // element 10 is even
  EXPECT_EQ(ov(even, view({1}, {1}, 11)), Overlap::None);  // element 11 is odd
}

TEST(RuntimeOverlap, DifferentDtypesCompareBytes) {
  ChipTensor f = view({4}, {1}, 0);                             // bytes 0..15
  ChipTensor bytes = view({4}, {1}, 12, SIMPLER_DT_UINT8);      // bytes 12..15
  ChipTensor after = view({4}, {1}, 16, SIMPLER_DT_UINT8);      // bytes 16..19
  EXPECT_NE(ov(f, bytes), Overlap::None);
  EXPECT_EQ(ov(f, after), Overlap::None);
  // Every other f32 against the bytes of an odd element (bytes 4..7).
  ChipTensor even_f = view({4}, {2}, 0);
  EXPECT_EQ(ov(even_f, view({4}, {1}, 4, SIMPLER_DT_UINT8)), Overlap::None);
  EXPECT_NE(ov(even_f, view({4}, {1}, 8, SIMPLER_DT_UINT8)), Overlap::None);
}

TEST(RuntimeOverlap, NonNestedStridesAreConservative) {
  // Strides 3 and 2 do not nest: only the bounding test applies, so the
  // views are taken to overlap even where no element is shared.
  ChipTensor a = view({4}, {3}, 0);  // 0 3 6 9
  ChipTensor b = view({4}, {2}, 1);  // 1 3 5 7
  EXPECT_EQ(ov(a, b), Overlap::Bounding);
  // Broadcast (stride 0) views too.
  EXPECT_EQ(ov(view({4, 4}, {0, 1}, 0), view({2}, {1}, 2)), Overlap::Bounding);
  // But disjoint bounding ranges stay disjoint.
  EXPECT_EQ(ov(view({4}, {3}, 0), view({4}, {2}, 100)), Overlap::None);
}

TEST(RuntimeOverlap, ThreeDimensionalTiles) {
  // A 4 x 8 x 8 block: tiles [b, 0:4, 0:4] and [b, 4:8, 4:8] per batch b.
  ChipTensor t00 = view({1, 4, 4}, {64, 8, 1}, 0);
  ChipTensor t11 = view({1, 4, 4}, {64, 8, 1}, 4 * 8 + 4);
  ChipTensor next_batch = view({1, 4, 4}, {64, 8, 1}, 64);
  ChipTensor all_batches_col0 = view({4, 8, 1}, {64, 8, 1}, 0);
  EXPECT_EQ(ov(t00, t11), Overlap::None);
  EXPECT_EQ(ov(t00, next_batch), Overlap::None);
  EXPECT_EQ(ov(t00, all_batches_col0), Overlap::Box);
  EXPECT_EQ(ov(t11, all_batches_col0), Overlap::None);
}

TEST(RuntimeOverlap, CheckViewRejectsBadViews) {
  std::string why;
  ChipTensor t = view({16}, {1}, 0);
  t.buffer.size = 60;  // 15 floats
  EXPECT_FALSE(check_view(t, &why));
  EXPECT_NE(why.find("reaches byte 64"), std::string::npos) << why;
  t = view({16}, {-1}, 16);
  EXPECT_FALSE(check_view(t, &why));
  t = view({16}, {1}, 0);
  t.ndims = 0;
  EXPECT_FALSE(check_view(t, &why));
  t = view({16}, {1}, 0);
  t.dtype = DataType(99);
  EXPECT_FALSE(check_view(t, &why));
  t = view({16, 16}, {int64_t(1) << 62, 1}, 0);
  EXPECT_FALSE(check_view(t, &why));  // overflow
  EXPECT_TRUE(check_view(view({2, 2}, {16, 1}, 16 * 8), &why)) << why;
}

TEST(RuntimeTensorMap, FindsLiveOverlappingWriters) {
  std::unique_ptr<TaskSlot[]> slots(new TaskSlot[4]);
  for (int i = 0; i < 4; i++) slots[i].id = make_id(uint64_t(i), 0);
  TensorMap m;
  ChipTensor left = view({8, 8}, {16, 1}, 0), right = view({8, 8}, {16, 1}, 8);
  m.insert(left, byte_range(left), &slots[0]);
  m.insert(right, byte_range(right), &slots[1]);
  EXPECT_EQ(m.size(), 2u);
  std::vector<TaskSlot*> found;
  ChipTensor probe = view({1, 2}, {16, 1}, 3 * 16 + 9);  // inside `right`
  m.find(probe, byte_range(probe), false, [&](const TensorMap::Entry& e, Overlap, bool) { found.push_back(e.task); });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], &slots[1]);

  // A finished writer imposes nothing and is pruned (diagnostics still see it).
  slots[1].state.store(kDone);
  int finished = 0;
  m.find(probe, byte_range(probe), true, [&](const TensorMap::Entry&, Overlap, bool live) { finished += !live; });
  EXPECT_EQ(finished, 1);
  found.clear();
  m.find(probe, byte_range(probe), false, [&](const TensorMap::Entry& e, Overlap, bool) { found.push_back(e.task); });
  EXPECT_TRUE(found.empty());
  EXPECT_EQ(m.size(), 1u);

  // A failed writer stays (its readers must be poisoned).
  m.insert(right, byte_range(right), &slots[2]);
  slots[2].state.store(kFailed);
  found.clear();
  m.find(probe, byte_range(probe), false, [&](const TensorMap::Entry& e, Overlap, bool) { found.push_back(e.task); });
  EXPECT_EQ(found.size(), 1u);

  // A write covering an older entry replaces it; a reused slot is stale.
  ChipTensor whole = view({8, 16}, {16, 1}, 0);
  m.insert(whole, byte_range(whole), &slots[3]);
  EXPECT_EQ(m.size(), 1u);
  slots[3].id = make_id(99, 0);  // the slot now holds another task
  found.clear();
  m.find(probe, byte_range(probe), false, [&](const TensorMap::Entry& e, Overlap, bool) { found.push_back(e.task); });
  EXPECT_TRUE(found.empty());
}

TEST(RuntimeTensorMap, ManyDisjointSlicesStayCheap) {
  // 10^4 pending writers of disjoint slices; each probe visits only its
  // neighbourhood (ordered by address), and a whole-buffer probe sees all.
  const int n = 10000;
  std::unique_ptr<TaskSlot[]> slots(new TaskSlot[n]);
  TensorMap m;
  for (int i = 0; i < n; i++) {
    slots[i].id = make_id(uint64_t(i), 0);
    ChipTensor s = view({16}, {1}, uint64_t(i) * 16);
    m.insert(s, byte_range(s), &slots[i]);
  }
  int hits = 0;
  ChipTensor one = view({16}, {1}, 5000 * 16);
  m.find(one, byte_range(one), false, [&](const TensorMap::Entry&, Overlap, bool) { hits++; });
  EXPECT_EQ(hits, 1);
  hits = 0;
  ChipTensor all = view({uint32_t(n * 16)}, {1}, 0);
  m.find(all, byte_range(all), false, [&](const TensorMap::Entry&, Overlap, bool) { hits++; });
  EXPECT_EQ(hits, n);
}
