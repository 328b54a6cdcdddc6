/**
 * The `k` smallest items of `items` under `cmp`, sorted ascending. O(n log k) with a bounded
 * max-heap, so a 10,000-record window costs about one comparison per record once the heap
 * is full, instead of a full sort.
 */
export function topK<T>(items: readonly T[], k: number, cmp: (a: T, b: T) => number): T[] {
  if (k <= 0) return [];
  if (items.length <= k) return [...items].sort(cmp);
  const heap = new BoundedHeap(k, cmp);
  for (const item of items) heap.offer(item);
  return heap.sorted();
}

/**
 * Keeps the `k` best items offered (smallest under `cmp`). `worst()` lets a caller skip
 * building an item that could not get in, so a scan over many candidates allocates only for
 * the few that do.
 */
export class BoundedHeap<T> {
  private readonly heap: T[] = [];
  constructor(
    private readonly k: number,
    private readonly cmp: (a: T, b: T) => number,
  ) {}

  /** How many items are kept. */
  get size(): number {
    return this.heap.length;
  }

  get full(): boolean {
    return this.heap.length >= this.k;
  }

  /** The worst item kept (the one the next better offer replaces). */
  worst(): T | undefined {
    return this.heap[0];
  }

  offer(item: T): void {
    if (this.k <= 0) return;
    if (this.heap.length < this.k) {
      this.heap.push(item);
      siftUp(this.heap, this.heap.length - 1, this.cmp);
    } else if (this.cmp(item, this.heap[0]!) < 0) {
      this.heap[0] = item;
      siftDown(this.heap, 0, this.cmp);
    }
  }

  /** The kept items, best first. */
  sorted(): T[] {
    return this.heap.sort(this.cmp);
  }
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
