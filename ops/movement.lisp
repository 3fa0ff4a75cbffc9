;;; Movement: every one a VIEW (shape/strides/offset/mask), never a copy, but contiguous.

(composite reshape ((X{T}[...] shape) -> (Y{T}[...])) "reshape (one -1 is inferred)" (VIEW X :reshape shape))
(composite permute ((X{T}[...] axes) -> (Y{T}[...])) "reorder axes" (VIEW X :permute axes))
(composite transpose ((X{T}[...]) -> (Y{T}[...])) "swap the last two axes" (VIEW X :swap [-1 -2]))
(composite expand ((X{T}[...] shape) -> (Y{T}[...]))
  "broadcast to SHAPE, as numpy.broadcast_to (may add leading axes)"
  (VIEW X :expand shape))
(composite squeeze ((X{T}[...] axis) -> (Y{T}[...])) "drop size-1 axes" (VIEW X :squeeze axis))
(composite unsqueeze ((X{T}[...] axis) -> (Y{T}[...])) "insert a size-1 axis" (VIEW X :unsqueeze axis))
(composite slice ((X{T}[...] &rest specs) -> (Y{T}[...]))
  "[start stop step] per axis from the first, with Python's rules"
  (VIEW X :slice specs))
(composite flip ((X{T}[...]) -> (Y{T}[...]) &key (axis nil)) "reverse along axes (all without :axis)"
  (VIEW X :flip axis))
(composite pad ((X{T}[...] widths) -> (Y{T}[...]) &key (value 0))
  "pad with [[lo hi] ...] per axis from the first, filled with :value"
  (WHERE (VIEW (CONST true :shape (shape X)) :pad widths) (VIEW X :pad widths) value))
(composite contiguous ((X{T}[...]) -> (Y{T}[...])) "materialize into a fresh buffer" (COPY X))

(composite concat ((&rest xs) -> (Y{T}[...]) &key (axis 0))
  "join tensors along an axis"
  (assert (> (len xs) 0) "concat needs at least one tensor")
  (setf first (nth xs 0))
  (setf ax (axis first axis))
  (setf total 0)
  (dotimes (i (len xs)) (setf total (+ total (dim (nth xs i) ax))))
  (setf out nil)
  (setf off 0)
  (dotimes (i (len xs))
    (setf x (nth xs i))
    (setf d (dim x ax))
    (setf widths (append (repeat [0 0] ax) [[off (- total (+ off d))]]))
    (setf px (VIEW x :pad widths))
    (setf out (if (nil? out) px (WHERE (VIEW (CONST true :shape (shape x)) :pad widths) px out)))
    (setf off (+ off d)))
  out)
