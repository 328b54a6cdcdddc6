/**
 * The `k` smallest items of `items` under `cmp`, sorted ascending. O(n log k) with a bounded
 * max-heap, so a 10,000-record window costs about one comparison per record once the heap
 * is full, instead of a full sort.
 */
export function topK<T>(items: readonly T[], k: number, cmp: (a: T, b: T) => number): T[] {
  if (k <= 0) return [];
  if (items.length <= k) return [...items].sort(cmp);
  const heap: T[] = [];
  for (const item of items) {
    if (heap.length < k) {
      heap.push(item);
      siftUp(heap, heap.length - 1, cmp);
    } else if (cmp(item, heap[0]!) < 0) {
      heap[0] = item;
      siftDown(heap, 0, cmp);
    }
  }
  return heap.sort(cmp);
}

// Max-heap on `cmp`: the worst kept item sits at the root.
function siftUp<T>(h: T[], i: number, cmp: (a: T, b: T) => number): void {
  const x = h[i]!;
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (cmp(h[p]!, x) >= 0) break;
    h[i] = h[p]!;
    i = p;
  }
  h[i] = x;
}

function siftDown<T>(h: T[], i: number, cmp: (a: T, b: T) => number): void {
  const n = h.length;
  const x = h[i]!;
  for (;;) {
    let c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && cmp(h[c + 1]!, h[c]!) > 0) c++;
    if (cmp(h[c]!, x) <= 0) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = x;
}
