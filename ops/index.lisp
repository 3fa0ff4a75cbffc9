;;; Indexing: gathers and running reductions, written as comparisons against INDEX.
;;; A gather of K indices from an axis of size n compares every index with 0..n-1 and reduces
;;; the matches: O(K n) work, no data-dependent addressing, so every runtime compiles it and
;;; an out-of-range index reads zero (false for bool) instead of faulting.

(composite take ((X{T}[...] I{U}[...]) -> (Y{T}[...]) &key (axis 0))
  "numpy.take: the slices of X at integer indices I along :axis (negative indices count from the end)"
  (setf ax (axis X axis))
  (setf n (dim X ax))
  (setf pre [])
  (dotimes (i ax) (setf pre (append pre [(dim X i)])))
  (setf post [])
  (dotimes (i (- (rank X) (+ ax 1))) (setf post (append post [(dim X (+ ax (+ i 1)))])))
  (setf k (+ ax (rank I)))
  (setf ii (cast I i64))
  (setf ij (WHERE (CMPLT ii 0) (ADD ii n) ii))
  (setf xv (reshape X (append pre (repeat 1 (rank I)) [n] post)))
  (setf iv (reshape ij (append (repeat 1 ax) (shape I) [1] (repeat 1 (len post)))))
  (setf hit (= (INDEX (append pre (shape I) [n] post) :axis k) iv))
  (if (bool? X) (max (WHERE hit xv false) :axis k) (sum (WHERE hit xv 0) :axis k)))

(composite take-along-axis ((X{T}[...] I{U}[...]) -> (Y{T}[...]) &key (axis 0))
  "numpy.take_along_axis: Y[.., j, ..] = X[.., I[.., j, ..], ..] along :axis (I has X's rank)"
  (assert (= (rank X) (rank I)) "take-along-axis: indices need the rank of the data")
  (setf ax (axis X axis))
  (setf r (rank X))
  (setf n (dim X ax))
  (setf ii (cast I i64))
  (setf ij (WHERE (CMPLT ii 0) (ADD ii n) ii))
  (setf xv (unsqueeze (permute X (append (range 0 ax) (range (+ ax 1) r) [ax])) ax))
  (setf hit (= (INDEX (append (shape I) [n]) :axis r) (unsqueeze ij -1)))
  (if (bool? X) (max (WHERE hit xv false) :axis -1) (sum (WHERE hit xv 0) :axis -1)))

(composite scan-mask ((X{T}[...]) -> (Y{bool}[...]) &key (axis 0) (exclusive false) (reverse false))
  "the [.. n(at :axis) .. n] mask of a running reduction: which source m feeds output j"
  (setf ax (axis X axis))
  (setf r (rank X))
  (setf n (dim X ax))
  (setf ms (append (repeat 1 ax) [n] (repeat 1 (- r (+ ax 1))) [n]))
  (setf j (INDEX ms :axis ax))
  (setf m (INDEX ms :axis r))
  (if reverse
      (if exclusive (CMPLT j m) (not (CMPLT m j)))
      (if exclusive (CMPLT m j) (not (CMPLT j m)))))

(composite cumsum ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (exclusive false) (reverse false))
  "running sum along :axis (exclusive: without the element itself; reverse: from the end)"
  (setf ax (axis X axis))
  (setf xv (unsqueeze (permute X (append (range 0 ax) (range (+ ax 1) (rank X)) [ax])) ax))
  (sum (WHERE (scan-mask X :axis ax :exclusive exclusive :reverse reverse) xv 0) :axis -1))

(composite cumprod ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (exclusive false) (reverse false))
  "running product along :axis (exclusive: without the element itself; reverse: from the end)"
  (setf ax (axis X axis))
  (setf xv (unsqueeze (permute X (append (range 0 ax) (range (+ ax 1) (rank X)) [ax])) ax))
  (prod (WHERE (scan-mask X :axis ax :exclusive exclusive :reverse reverse) xv 1) :axis -1))

(composite triu ((X{T}[...]) -> (Y{T}[...]) &key (k 0))
  "the upper triangle of the last two axes: X where column - row >= k, else 0"
  (setf s [(dim X -2) (dim X -1)])
  (WHERE (not (CMPLT (ADD (INDEX s :axis 1) (NEG (INDEX s :axis 0))) k)) X (if (bool? X) false 0)))

(composite tril ((X{T}[...]) -> (Y{T}[...]) &key (k 0))
  "the lower triangle of the last two axes: X where column - row <= k, else 0"
  (setf s [(dim X -2) (dim X -1)])
  (WHERE (not (CMPLT k (ADD (INDEX s :axis 1) (NEG (INDEX s :axis 0))))) X (if (bool? X) false 0)))
