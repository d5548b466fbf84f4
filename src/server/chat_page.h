/* chat_page.h -- the self-contained chat page (HTML + CSS + JS, no external resources) that the
 * leader serves on GET /. Source: src/server/chat_page.html; src/server/chat_page.c is generated
 * from it by src/server/gen_chat_page.py. The page streams from /v1/chat/completions and asks for
 * the API key when the server answers 401. */
#ifndef SITS_SERVER_CHAT_PAGE_H
#define SITS_SERVER_CHAT_PAGE_H

#include <stddef.h>

extern const char sits_srv_chat_page[];       /* NUL-terminated UTF-8 */
extern const size_t sits_srv_chat_page_len;   /* bytes, without the NUL */

#endif
