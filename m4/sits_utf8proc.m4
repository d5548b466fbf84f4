# sits_utf8proc.m4 -- utf8proc (NFC normalisation for tokenizers that ask for it, e.g. Qwen2).
# Optional: without it such tokenizers load but refuse non-ASCII text with a clear message.
AC_DEFUN([SITS_CHECK_UTF8PROC], [SITS_CHECK_LIB([UTF8PROC], [utf8proc], [libutf8proc], [utf8proc.h], [utf8proc], [utf8proc_map], [no])])
