#define GREET_VERSION "1.4.2"
