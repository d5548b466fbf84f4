# sits_utf8proc.m4 -- utf8proc (required): Unicode normalisation and case mapping for the tokenizer and the chat-template interpreter.
AC_DEFUN([SITS_CHECK_UTF8PROC], [SITS_CHECK_LIB([UTF8PROC], [utf8proc], [libutf8proc], [utf8proc.h], [utf8proc], [utf8proc_map], [yes])])
