;;; Reductions. :axis is an integer, a list (negative and unsorted entries allowed) or nil
;;; for every axis; :keepdims keeps the reduced axes as size 1.

(composite sum ((X{T}[...]) -> (Y{T}[...]) &key (axis nil) (keepdims false))
  "sum over axes (integers wrap; bool is an error)"
  (REDUCE X :op add :axis axis :keepdims keepdims))
(composite prod ((X{T}[...]) -> (Y{T}[...]) &key (axis nil) (keepdims false))
  "product over axes"
  (REDUCE X :op mul :axis axis :keepdims keepdims))
(composite max ((X{T}[...]) -> (Y{T}[...]) &key (axis nil) (keepdims false))
  "maximum over axes (any for bool)"
  (REDUCE X :op max :axis axis :keepdims keepdims))
(composite min ((X{T}[...]) -> (Y{T}[...]) &key (axis nil) (keepdims false))
  "minimum over axes (all for bool)"
  (if (float? X)
      (NEG (REDUCE (NEG X) :op max :axis axis :keepdims keepdims))
      (NOT (REDUCE (NOT X) :op max :axis axis :keepdims keepdims))))
(composite mean ((X{T}[...]) -> (Y{T}[...]) &key (axis nil) (keepdims false))
  "arithmetic mean over axes (float)"
  (/ (sum X :axis axis :keepdims keepdims) (CAST (count X axis) (dtype X))))

(composite argmax ((X{T}[...]) -> (Y{i64}[...]) &key (axis nil) (keepdims false))
  "index of the first maximum along an axis (of the flattened tensor without :axis)"
  (if (nil? axis)
      (let ((flat (argmax (VIEW X :reshape [-1]) :axis 0)))
        (if keepdims (VIEW flat :reshape (repeat 1 (rank X))) flat))
      (let ((m (max X :axis axis :keepdims true))
            (hit (or (= X m) (!= X X)))              ; the first nan wins, as in numpy
            (idx (INDEX (shape X) :axis axis)))
        (min (WHERE hit idx (dim X axis)) :axis axis :keepdims keepdims))))
(composite argmin ((X{T}[...]) -> (Y{i64}[...]) &key (axis nil) (keepdims false))
  "index of the first minimum along an axis"
  (argmax (if (float? X) (NEG X) (NOT X)) :axis axis :keepdims keepdims))
